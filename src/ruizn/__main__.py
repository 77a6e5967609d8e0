from ruizn.shell.cli.main import main

main()
