"""Project trust: whether an agent may load the project files of a folder, asked once and kept."""
