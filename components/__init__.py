"""Pure UI builders: figures, token strip, tables and layout pieces. No I/O, no globals, no data imports."""
