from ringleader.app.cli import main

main()
