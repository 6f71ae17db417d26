"""The plan: the campaign file's typed tables, their validation, the GPU catalog and the calendar."""
