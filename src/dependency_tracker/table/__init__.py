"""The dependency table: keys, schema, row types, and the store of its rows."""
