"""The engine that runs where the files are: stdlib only, python3 >= 3.9."""
