"""Rendering: terminal tables, JSON, Markdown/HTML with plots."""
