"""Example tasks used by configs/ and the demo."""
