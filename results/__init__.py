"""The project's reported figures as records (results/records/) and the script that renders
the results pages from them (results/render.py)."""
