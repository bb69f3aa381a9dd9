"""Pure functions over captures: no root, no live server, re-runnable later."""
