"""The project's own security and reliability rules, as pure functions over synthesized output."""
