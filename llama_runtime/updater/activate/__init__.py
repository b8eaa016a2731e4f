"""Activate: the install transaction, the atomic switch and the server swap, rollback, gc."""
