"""Views: the URL codec, every page's view state, every cross-page link and the page paths."""
