"""The presentation layer: the command line (:mod:`.cli`), the notebooks' figures and
widgets (:mod:`.plots`, :mod:`.figures`, :mod:`.widgets`), the machine's checks
(:mod:`.doctor`) and the labs' self-checks (:mod:`.labs`).
"""
