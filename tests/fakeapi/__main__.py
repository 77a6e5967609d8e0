from tests.fakeapi.server import main

main()
