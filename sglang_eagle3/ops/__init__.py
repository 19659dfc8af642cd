"""The drafter's fused norm + concat + fc: the op, its dispatch and its SGLang patch."""
