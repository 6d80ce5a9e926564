"""Typer commands: parse, call the library, render. Nothing else lives here."""
