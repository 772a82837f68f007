"""Views of a trace: one small renderer per output."""
