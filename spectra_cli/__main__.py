from spectra_cli.cli import main

main()
