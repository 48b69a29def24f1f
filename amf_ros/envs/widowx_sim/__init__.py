"""An embedded WidowX 250s in MuJoCo: the arm model, a Bridge-style tabletop and its tasks (no GPU needed)."""
