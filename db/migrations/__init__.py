"""Alembic migrations of the store's schema (run from db.migrate, no alembic.ini needed)."""
