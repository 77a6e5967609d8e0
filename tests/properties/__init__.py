"""Property tests of the pure core (hypothesis): the laws every valid run obeys."""
