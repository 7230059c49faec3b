"""Certification of the full space at scale: proven intervals [lower bound, best plan].

For instances far beyond the exact models (the 50-instance NEST grid: 26-98
layers, 64-1,024 devices), ``certify_full`` bounds every shape (c, b, S, d, z) of
the full space of DESIGN §4 — a placement-free bound (bounds), one replica's
path (relax.path_bound) and a CP-SAT placement relaxation with domain packing
(relax) — and places the relaxation's solutions on the network (realise), and prices
wider placement classes (layouts) at a few open shapes (probe), to find better plans than
the DP's, each priced by the evaluator (search).  Stage prices
are the evaluator's integers (chain); shapes and stage options live in split.
"""

from nest_cp.solvers.certify.search import Certificate, ShapeOutcome, certify_full, unsupported

__all__ = ["Certificate", "ShapeOutcome", "certify_full", "unsupported"]
