"""The stream pumps: an upstream stream translated into canonical events, and the one relay to the client."""
