"""Training helpers built on the compiler, not part of it: gradient clipping (``clip``) and
Keras-style optimizers (``optim``). ``symgrad`` re-exports the clipping functions and imports
``optim`` on first access of ``sg.optim``."""
