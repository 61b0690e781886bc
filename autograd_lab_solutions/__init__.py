"""Reference solutions and exercise definitions, one module per notebook.

``nbNN_<topic>.py`` defines and registers the exercises of notebook NN (see
``docs/authoring-exercises.md``).  The registry imports every module here on first
use, so a new file is picked up without editing anything else.  Students never
import this package: ``solution()`` shows a reference after a first attempt, and
graded runs refuse the import.
"""
