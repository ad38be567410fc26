"""The policy and its ten-line test in docs/writing-a-policy.md run as written."""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def test_the_guide_s_policy_and_its_test_pass(tmp_path, monkeypatch):
    text = open(os.path.join(ROOT, "docs", "writing-a-policy.md")).read()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    policy = next(b for b in blocks if "class Mine(Policy)" in b)
    test = next(b for b in blocks if "def test_my_policy" in b)
    (tmp_path / "mymod.py").write_text(policy)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "mymod", raising=False)
    scope: dict = {}
    exec(compile(test, "writing-a-policy.md", "exec"), scope)
    scope["test_my_policy_spreads_a_stride"]()
    sys.modules.pop("mymod", None)
