"""Browser tests of the chat page and the Chainlit app (a package, so that its conftest
does not shadow tests/e2e/conftest.py when both folders run in one pytest session)."""
