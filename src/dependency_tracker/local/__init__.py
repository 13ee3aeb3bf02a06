"""Local mode: run the deployed handlers against moto, fed by event pumps."""
