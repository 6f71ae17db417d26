"""The demo campaign: toy training runs on the CPU and the files that set them up."""
