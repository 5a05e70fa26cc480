"""Plain-text rendering of a diagnosis for people: the answer first, then the evidence."""

from __future__ import annotations

from moeproxy.terminal import shown

from moeproxy.diagnose.taxonomy import HEALTHY

_MARK = {"critical": "!!", "warning": " !", "info": " -"}


def render_text(result: dict, run: str | None = None) -> str:
    """The verdict line, then one line per finding (severity, category, onset, metric, rule) with
    its evidence sentence indented below."""
    head = f"{shown(run)}: " if run else ""
    verdict, onset = result["verdict"], result.get("onset_step")
    if verdict == HEALTHY:
        lines = [f"{head}healthy: no critical finding"]
    else:
        epoch = result.get("onset_epoch")
        lines = [f"{head}{verdict} from step {onset}" + (f" (epoch {epoch:g})" if epoch is not None else "")]
    if result.get("confidence"):
        lines[0] += f" (confidence {result['confidence']}: {result.get('confidence_reason', '')})".replace(": )", ")")
    for alt in result.get("alternatives") or []:
        lines.append(f"  another reading: {alt['category']} from step {alt['onset_step']} ({shown(alt['why'])})")
    others = {n: r for n, r in result.get("runs", {}).items() if n != result.get("run")}
    for name, r in others.items():
        where = "" if r["onset_step"] is None else f" from step {r['onset_step']}"
        lines.append(f"  also in this file: {shown(name)}: {r['verdict']}{where} (confidence {r.get('confidence')})")
    findings = result.get("findings", [])
    if findings:
        lines.append("")
    for f in findings:
        step = "-" if f["onset_step"] is None else f["onset_step"]
        lines.append(f"{_MARK.get(f['severity'], '  ')} {f['severity']:<8} {f['category']:<18} "
                     f"step {step:<8} {shown(f['metric'])} [{f['rule']}]")
        lines.append(f"     {shown(f['evidence'])}")
    return "\n".join(lines) + "\n"
