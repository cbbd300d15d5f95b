from ringleader.cli import main

main()
