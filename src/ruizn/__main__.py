from ruizn.shell.cli import main

main()
