"""NumPy float64 references: direct transcriptions of each formula, the only source of goldens.

One module per encoding id (``posenc.reference.<id>``), defining the function named in the
spec's ``function:``. References take every parameter explicitly (no defaults), so goldens are
generated from the defaults declared in the spec, never from code. Trigonometric encodings also
define ``angle_bound(**inputs, **params)``: the largest |angle| the case evaluates.
"""
