"""Acknowledgements: what one holds back and when it ends (:mod:`.rules`), its rows and the
tick's pass over them (:mod:`.store`)."""
