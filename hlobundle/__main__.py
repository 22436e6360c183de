from ._cli._main import entry

entry()
