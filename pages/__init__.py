"""One module per URL; each owns its layout(**query) and its callbacks."""
