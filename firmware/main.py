# Board entry point (runs after boot.py): start the satellite. Ctrl-C drops to the REPL, as usual.
from satellite import app

app.main()
