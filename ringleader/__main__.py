from ringleader_app.cli import main

main()
