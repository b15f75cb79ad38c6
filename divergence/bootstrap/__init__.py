"""What ``diverge record`` injects into the processes it starts: ``sitecustomize.py`` (put on
their PYTHONPATH) calls :func:`divergence.bootstrap.child.start`, which starts a session and
attaches the frameworks. Above record/ and frameworks/, as the Python API is."""
