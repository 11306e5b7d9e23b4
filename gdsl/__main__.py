from gdsl.cli import entry

entry()
