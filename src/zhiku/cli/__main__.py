from zhiku.cli.app import main

main()
