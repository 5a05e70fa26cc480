"""Reading gaps found on blind38's logs (after their first-sight score): a trainer state's
``log_history`` held inside other text (a Python dict literal in a script, words around a paste), and
a table whose names stand one space apart with one unnamed cell after the named ones (fastai v1)."""

from __future__ import annotations

import json

from moeproxy.ingest import parse_file


def test_a_trainer_state_inside_a_python_script_is_read_from_its_log_history(tmp_path):
    records = [{"epoch": round(0.01 * i, 2), "learning_rate": 5e-05 - 1e-07 * i, "loss": 2.0 / i, "step": 500 * i}
               for i in range(1, 13)]
    body = json.dumps({"best_metric": None, "is_world_process_zero": True, "log_history": records,
                       "max_steps": 6000}, indent=4)
    body = body.replace("null", "None").replace("true", "True")  # as Python prints it
    log = tmp_path / "read_trainer_state.py"
    log.write_text('import json\n\nif __name__ == "__main__":\n    ts = ' + body + "\n    print(ts)\n")
    parsed = parse_file(log)
    assert parsed.format == "hf-trainer-state"
    loss = parsed.frame[parsed.frame.metric == "loss"]
    assert sorted(loss.step) == [500 * i for i in range(1, 13)]
    assert loss.sort_values("step").value.iloc[-1] == 2.0 / 12
    assert any("inside other text" in w for w in parsed.warnings)


def test_a_log_history_cut_off_is_read_to_its_last_complete_record(tmp_path):
    log = tmp_path / "cut.txt"
    log.write_text('my state:\n"log_history": [\n  {"loss": 1.0, "step": 1},\n  {"loss": 0.9, "step": 2},\n'
                   '  {"loss": 0.8, "st')
    parsed = parse_file(log)
    assert parsed.format == "hf-trainer-state"
    assert sorted(parsed.frame[parsed.frame.metric == "loss"].step) == [1, 2]
    assert any("cut off" in w for w in parsed.warnings)


def test_names_one_space_apart_over_rows_with_a_trailing_time_cell(tmp_path):
    rows = [f"{e} {1.5 / e:.6f} {1.0 / e + 0.1:.6f} {0.5 / e:.6f} (00:{9 + e % 3:02d})" for e in range(1, 20)]
    log = tmp_path / "fastai.md"
    log.write_text("Total time: 06:39\nepoch train_loss valid_loss error_rate\n" + "\n".join(rows) + "\n")
    parsed = parse_file(log)
    frame = parsed.frame
    assert set(frame.metric) >= {"train_loss", "valid_loss", "error_rate"}
    assert sorted(frame[frame.metric == "train_loss"].step) == list(range(1, 20))


def test_an_hf_model_cards_results_table_is_one_run_dated_by_its_step_column(tmp_path):
    # ``| Training Loss | Epoch | Step | Validation Loss | Wer |``: the splits of one run (not two
    # arms, as ``Baseline Loss`` beside ``Test Loss`` are), dated by Step rather than the epoch before it
    rows = [f"| {2.9 / k:.4f}        | {0.32 * k:.2f}  | {500 * k}   | {2.8 / k:.4f}          | {1 / k:.4f} |"
            for k in range(1, 15)]
    log = tmp_path / "README.md"
    log.write_text("## Training results\n\n| Training Loss | Epoch | Step  | Validation Loss | Wer    |\n"
                   "|:-------------:|:-----:|:-----:|:---------------:|:------:|\n" + "\n".join(rows) + "\n")
    parsed = parse_file(log)
    assert not parsed.arms
    frame = parsed.frame
    assert sorted(frame[frame.metric == "training loss"].step) == [500 * k for k in range(1, 15)]
    assert "validation loss" in set(frame.metric) and "epoch" in set(frame.metric)


def test_baseline_beside_test_columns_stay_two_arms(tmp_path):
    rows = [f"| {k} | {3.0 / k:.4f} | {3.0 / k:.4f} |" for k in range(1, 9)]
    log = tmp_path / "compare.md"
    log.write_text("| step | Baseline Loss | Test Loss |\n|---|---|---|\n" + "\n".join(rows) + "\n")
    assert set(parse_file(log).arms) == {"baseline", "test"}


def test_step_name_colon_value_lines_between_printed_arrays(tmp_path):
    # blind39: ``print(step, "Cost: ", cost)`` with the predictions printed between the lines
    lines = []
    for step, cost in enumerate(["2.45533e+12", "2.69762e+27", "inf", "inf", "nan", "nan", "nan"]):
        lines += [f"{step} Cost:  {cost}", "Prediction:", " [[-1104436.375]", " [-2224342.75 ]", " [-1749606.75 ]]"]
    log = tmp_path / "linreg.txt"
    log.write_text("\n".join(lines) + "\n")
    parsed = parse_file(log)
    assert parsed.format == "text"
    cost = parsed.frame[parsed.frame.metric == "cost"].sort_values("step")
    assert cost.step.tolist() == list(range(7)) and cost.value.iloc[0] == 2.45533e12
