import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# hack/ holds the local control plane manager (stdlib only); tests and benchmarks import it.
sys.path.insert(0, str(ROOT / "hack"))
