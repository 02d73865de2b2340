"""The research behind servesim's figures, outside the installed package (research/README.md): it imports the
product, the product never imports it."""
