"""One function or typed answer a command, above the domain layers: cli/ parses, asks app/ and renders."""
