"""The workspace's tables as rows: config JSON <-> grid rows and their checks (grid), imports from JSON, CSV and
TorchRec snippets (importers, snippet, import_apply) and ready-made configs (presets). Pure: no Streamlit."""
