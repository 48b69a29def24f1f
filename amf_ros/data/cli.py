"""`amf inspect`, `amf export rlds|lerobot`, `amf import bag|lerobot`: the data tools of the `amf` command."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any, Sequence

from amf_ros.data.schema import EpisodeValidationError
from amf_ros.data.store import EpisodeStore, StoreConfig
from amf_ros.data.stream_health import summarize as summarize_streams


def _summary(store: EpisodeStore, verify: bool) -> dict[str, Any]:
    scan = store.scan(validate=True, verify_checksums=verify)
    tasks: dict[str, dict[str, Any]] = {}
    for m in scan.episodes:
        t = tasks.setdefault(m.task, {"episodes": 0, "steps": 0, "success": 0, "failure": 0, "unknown": 0,
                                      "recovered": 0, "instructions": set()})
        t["episodes"] += 1
        t["steps"] += m.num_steps
        t["success" if m.success is True else "failure" if m.success is False else "unknown"] += 1
        t["recovered"] += int(m.recovered)
        t["instructions"].add(m.instruction)
    for t in tasks.values():
        known = t["success"] + t["failure"]
        t["success_rate"] = t["success"] / known if known else None
        t["instructions"] = sorted(t["instructions"])
    return {
        "dataset": str(store.root),
        "episodes": len(scan.episodes),
        "steps": sum(m.num_steps for m in scan.episodes),
        "tasks": dict(sorted(tasks.items())),
        "invalid": [{"episode": e.episode, "field": e.field, "problem": e.problem} for e in scan.invalid],
        "partial": [{"episode": p.episode_id, "task": p.task, "recoverable_steps": p.num_steps,
                     "age_s": round(p.age_s, 1)} for p in scan.partial],
    }


def _print_summary(s: dict[str, Any]) -> None:
    from amf_ros.outputs import format_table

    print(f"dataset {s['dataset']}: {s['episodes']} episodes, {s['steps']} steps")
    rows = [[task, t["episodes"], t["steps"], f"{t['success']}/{t['success'] + t['failure']}",
             "-" if t["success_rate"] is None else f"{100 * t['success_rate']:.0f}%", t["unknown"], t["recovered"]]
            for task, t in s["tasks"].items()]
    if rows:
        print(format_table(["task", "episodes", "steps", "successes", "success rate", "unknown", "recovered"], rows))
    for e in s.get("episode_list", []):
        print(f"  {e['episode']}  {e['task']:<20} {e['steps']:>5} steps  success={e['success']}"
              + ("  (recovered)" if e["recovered"] else ""))
        if e.get("streams"):
            print(f"      streams: {summarize_streams(e['streams'])}")
    for e in s["invalid"]:
        print(f"INVALID {e['episode']}: field {e['field']!r}: {e['problem']}")
    for p in s["partial"]:
        print(f"PARTIAL {p['episode']} (task {p['task']}): never committed; {p['recoverable_steps']} steps "
              f"recoverable; last written {p['age_s']} s ago")


def inspect_main(argv: Sequence[str]) -> int:
    """`amf inspect DATASET`: per-task summary; exit 1 if an episode is invalid (or partial, with --strict)."""
    ap = argparse.ArgumentParser(prog="amf inspect", description="Summarise and validate an episode dataset: "
                                 "episodes, steps and success rate per task; invalid and partial episodes.")
    ap.add_argument("dataset", help="episode store directory")
    ap.add_argument("--verify", action="store_true", help="also re-hash every chunk file (slower)")
    ap.add_argument("--json", action="store_true", help="print the summary as JSON")
    ap.add_argument("--recover", action="store_true",
                    help="commit the complete chunks of partial episodes (recovered=true, success=null)")
    ap.add_argument("--discard-partial", action="store_true", help="delete partial episodes")
    ap.add_argument("--min-age", type=float, default=30.0,
                    help="only recover/discard partial episodes untouched for this many seconds (default 30: "
                         "a younger one may belong to a live recorder)")
    ap.add_argument("--strict", action="store_true", help="exit 1 if there are partial episodes too")
    ap.add_argument("--episodes", action="store_true",
                    help="also list every episode, with each stream's measured rate, gaps and dropped samples")
    args = ap.parse_args(list(argv))
    try:
        store = EpisodeStore(args.dataset, create=False)
    except FileNotFoundError as exc:
        print(f"amf inspect: {exc}", file=sys.stderr)
        return 2
    if args.recover and args.discard_partial:
        ap.error("--recover and --discard-partial are exclusive")
    for p in store.partial():
        if not (args.recover or args.discard_partial):
            break
        if p.age_s < args.min_age:
            print(f"skipping partial {p.episode_id}: modified {p.age_s:.0f} s ago (< --min-age {args.min_age})")
            continue
        if args.discard_partial:
            store.discard_partial(p.episode_id)
            print(f"discarded partial {p.episode_id}")
        else:
            r = store.recover(p.episode_id)
            print(f"{r.action} {r.episode_id}: {r.reason}" + (f" ({r.num_steps} steps)" if r.num_steps else ""))
    summary = _summary(store, args.verify)
    if args.episodes:
        summary["episode_list"] = [{"episode": e["episode_id"], "task": e["task"], "steps": e["num_steps"],
                                    "success": e["success"], "recovered": e["recovered"],
                                    "streams": store.meta(e["episode_id"]).extra.get("streams", {})}
                                   for e in store.index()]
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        _print_summary(summary)
    bad = bool(summary["invalid"]) or (args.strict and bool(summary["partial"]))
    return 1 if bad else 0


def export_main(argv: Sequence[str]) -> int:
    """`amf export rlds|lerobot DATASET OUT`: write a dataset Octo (RLDS) or LeRobot-format trainers read."""
    argv = list(argv)
    if argv[:1] == ["lerobot"]:
        return export_lerobot_main(argv[1:])
    from amf_ros.data.rlds import RldsExportConfig, export_rlds

    ap = argparse.ArgumentParser(prog="amf export", description="Export episodes. Formats: rlds (TFDS directory "
                                 "OUT/NAME/VERSION with TFRecord shards, dataset_info.json, features.json); "
                                 "lerobot (LeRobot v3.0 dataset; see `amf export lerobot -h`).")
    ap.add_argument("format", choices=["rlds", "lerobot"], help="output format")
    ap.add_argument("dataset", help="episode store directory")
    ap.add_argument("out", help="TFDS data_dir to write into")
    d = RldsExportConfig()
    ap.add_argument("--name", default=d.name, help=f"TFDS dataset name (default {d.name})")
    ap.add_argument("--version", default=d.version, help=f"dataset version X.Y.Z (default {d.version})")
    ap.add_argument("--image-size", type=int, nargs=2, metavar=("H", "W"), default=list(d.image_size or ()),
                    help="resize images to H W (default 256 256, Octo's primary camera)")
    ap.add_argument("--no-resize", action="store_true", help="keep images at their recorded size")
    ap.add_argument("--image-format", choices=["png", "jpeg"], default=d.image_format)
    ap.add_argument("--episodes-per-shard", type=int, default=d.episodes_per_shard)
    ap.add_argument("--include-unsuccessful", action="store_true",
                    help="also export episodes whose success is false or unknown (reward 0)")
    ap.add_argument("--task", action="append", default=None, help="only this task key (repeatable)")
    ap.add_argument("--overwrite", action="store_true", help="replace an existing OUT/NAME/VERSION")
    args = ap.parse_args(list(argv))
    try:
        cfg = RldsExportConfig(name=args.name, version=args.version,
                               image_size=None if args.no_resize else tuple(args.image_size),
                               image_format=args.image_format, episodes_per_shard=args.episodes_per_shard,
                               include_unsuccessful=args.include_unsuccessful, tasks=args.task)
        res = export_rlds(EpisodeStore(args.dataset, create=False), args.out, cfg, overwrite=args.overwrite)
    except (ValueError, FileNotFoundError, EpisodeValidationError) as exc:
        print(f"amf export: {exc}", file=sys.stderr)
        return 1
    for eid, why in res.skipped.items():
        print(f"skipped {eid}: {why}")
    print(f"wrote {res.episodes} episodes ({res.steps} steps, {res.shards} shards, {res.num_bytes / 1e6:.1f} MB) "
          f"to {res.path}")
    print(f"open with: tfds.builder({cfg.name!r}, data_dir={str(Path(args.out).resolve())!r})")
    return 0


def export_lerobot_main(argv: Sequence[str]) -> int:
    """`amf export lerobot DATASET OUT`: a LeRobot v3.0 dataset (parquet + one MP4 per camera)."""
    from amf_ros.data.lerobot import LeRobotExportConfig, export_lerobot

    d = LeRobotExportConfig()
    ap = argparse.ArgumentParser(prog="amf export lerobot", description="Export episodes as a LeRobot v3.0 "
                                 "dataset (what LeRobotDataset, openpi and GR00T read): state, action, cameras as "
                                 "video, task instruction, timestamps at the recording rate, success flag.")
    ap.add_argument("dataset", help="episode store directory")
    ap.add_argument("out", help="dataset directory to create (LeRobotDataset(repo_id, root=OUT))")
    ap.add_argument("--fps", type=int, default=None,
                    help="frame rate (default: the episodes' recording rate; they must share one)")
    ap.add_argument("--video-codec", choices=sorted(("av1", "h264")), default=d.video_codec,
                    help=f"camera video codec (default {d.video_codec}, LeRobot's)")
    ap.add_argument("--crf", type=int, default=d.crf, help=f"video constant quality (default {d.crf})")
    ap.add_argument("--image-size", type=int, nargs=2, metavar=("H", "W"), default=None,
                    help="resize camera frames to H W (default: as recorded)")
    ap.add_argument("--successful-only", action="store_true",
                    help="leave out episodes whose success is false or unknown (default: export all, flagged)")
    ap.add_argument("--task", action="append", default=None, help="only this task key (repeatable)")
    ap.add_argument("--robot-type", default=None, help="info.json robot_type (default: the episodes' robot)")
    ap.add_argument("--no-rate-check", action="store_true",
                    help="export episodes whose measured step rate contradicts their declared rate")
    ap.add_argument("--overwrite", action="store_true", help="replace an existing OUT")
    args = ap.parse_args(list(argv))
    try:
        cfg = LeRobotExportConfig(fps=args.fps, video_codec=args.video_codec, crf=args.crf,
                                  image_size=tuple(args.image_size) if args.image_size else None,
                                  include_unsuccessful=not args.successful_only, tasks=args.task,
                                  robot_type=args.robot_type, check_rate=not args.no_rate_check)
        res = export_lerobot(EpisodeStore(args.dataset, create=False), args.out, cfg, overwrite=args.overwrite,
                             progress=sys.stderr.isatty())
    except (ValueError, FileNotFoundError, EpisodeValidationError) as exc:
        print(f"amf export lerobot: {exc}", file=sys.stderr)
        return 1
    for eid, why in res.skipped.items():
        print(f"skipped {eid}: {why}")
    print(f"wrote {res.episodes} episodes ({res.frames} frames at {res.fps} Hz, {res.num_bytes / 1e6:.1f} MB) "
          f"to {res.path}")
    print(f"open with: LeRobotDataset('local/{res.path.name}', root={str(res.path.resolve())!r})")
    return 0


def import_lerobot_main(argv: Sequence[str]) -> int:
    """`amf import lerobot SRC DATASET`: the episodes of a local LeRobot v3 dataset into an episode store."""
    from amf_ros.data.lerobot import import_lerobot

    ap = argparse.ArgumentParser(prog="amf import lerobot", description="Import a local LeRobot v3.x dataset "
                                 "into an episode store, to start AMF from demonstrations recorded elsewhere.")
    ap.add_argument("src", help="LeRobot dataset directory (with meta/info.json)")
    ap.add_argument("dataset", help="episode store to add to (created if missing)")
    ap.add_argument("--task", default=None,
                    help="task key of every episode (default: amf_ros's own, else derived from the task string)")
    ap.add_argument("--success", choices=["true", "false"], default=None,
                    help="verdict of episodes that carry none (default: next.success of the last frame, else "
                         "unknown)")
    ap.add_argument("--episode", type=int, action="append", default=None, help="only this episode index")
    ap.add_argument("--image-codec", choices=["png", "jpeg", "raw", "h264", "av1"], default="png",
                    help="how the store keeps the camera frames (default png)")
    args = ap.parse_args(list(argv))
    try:
        store = EpisodeStore(args.dataset, StoreConfig(image_codec=args.image_codec))
        res = import_lerobot(args.src, store, task=args.task,
                             success=None if args.success is None else args.success == "true",
                             episodes=args.episode, progress=sys.stderr.isatty())
    except (ValueError, FileNotFoundError, EpisodeValidationError) as exc:
        print(f"amf import lerobot: {exc}", file=sys.stderr)
        return 1
    for index, why in res.skipped.items():
        print(f"skipped episode {index}: {why}")
    print(f"imported {len(res.episodes)} episodes ({res.frames} frames) into {store.root}")
    return 0


def _parse_images(values: Sequence[str] | None) -> dict[str, str] | None:
    if values is None:
        return None
    out = {}
    for v in values:
        name, sep, topic = v.partition("=")
        if not sep:
            name, topic = "image_primary" if not out else f"image_{len(out)}", v
        out[name] = topic
    return out


def import_main(argv: Sequence[str]) -> int:
    """`amf import bag BAG --task T --instruction I --dataset DIR`: one rosbag2 recording -> one episode;
    `amf import lerobot SRC DATASET`: a LeRobot v3 dataset."""
    argv = list(argv)
    if argv[:1] == ["lerobot"]:
        return import_lerobot_main(argv[1:])
    from amf_ros.data.bag_import import bag_topics, import_bag, resolve_topics
    from amf_ros.data.sync import SyncConfig

    ap = argparse.ArgumentParser(prog="amf import", description="Import a rosbag2 recording (sqlite3 or MCAP) "
                                 "as one episode, through the demo_recorder's synchroniser.")
    ap.add_argument("format", choices=["bag", "lerobot"], help="input format")
    ap.add_argument("bag", help="rosbag2 directory (with metadata.yaml)")
    ap.add_argument("--task", required=True, help="task key, as in config/tasks/*.yaml")
    ap.add_argument("--instruction", required=True, help="natural-language instruction of the demonstration")
    ap.add_argument("--dataset", default="runs/dataset", help="episode store to add to (default runs/dataset)")
    ap.add_argument("--action-topic", default=None, help="EefDeltaAction topic (default /amf/action or by type)")
    ap.add_argument("--state-topic", default=None, help="StateVector/JointState topic (default by name or type)")
    ap.add_argument("--image-topic", action="append", default=None, metavar="[KEY=]TOPIC",
                    help="camera topic, optionally with its observation key (default key image_primary)")
    ap.add_argument("--no-images", action="store_true", help="record no camera")
    ap.add_argument("--rate", type=float, default=5.0, help="control rate of --mode tick, Hz (default 5)")
    ap.add_argument("--mode", choices=["tick", "on_action"], default="tick")
    ap.add_argument("--aggregate", choices=["latest", "sum_delta"], default="latest")
    ap.add_argument("--max-obs-age", type=float, default=1.0, help="seconds (see amf_ros.data.sync)")
    ap.add_argument("--stamp", choices=["header", "receive"], default="header",
                    help="timestamp of each message: header.stamp (as the live recorder) or bag receive time")
    ap.add_argument("--failure", action="store_true", help="mark the demonstration unsuccessful")
    ap.add_argument("--robot", default="", help="robot name for the metadata")
    ap.add_argument("--image-codec", choices=["png", "jpeg", "raw"], default="png")
    args = ap.parse_args(list(argv))
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        images = {} if args.no_images else _parse_images(args.image_topic)
        topics = resolve_topics(bag_topics(args.bag), args.action_topic, args.state_topic, images)
        sync = SyncConfig(rate_hz=args.rate, mode=args.mode, aggregate=args.aggregate,
                          max_obs_age_s=args.max_obs_age)
        store = EpisodeStore(args.dataset, StoreConfig(image_codec=args.image_codec))
        res = import_bag(args.bag, store, args.task, args.instruction, topics=topics, sync=sync,
                         success=not args.failure, robot=args.robot, stamp=args.stamp)
    except (ValueError, FileNotFoundError) as exc:
        print(f"amf import: {exc}", file=sys.stderr)
        return 1
    print(f"imported {res.num_steps} steps from {res.messages_read} messages -> {res.path}")
    print("topics: " + ", ".join(f"{s}={t}" for t, s in res.topics.items()))
    skipped = {k: v for k, v in res.stats.items() if k.startswith("skipped") or k == "late_messages"}
    print("synchroniser: " + ", ".join(f"{k}={v}" for k, v in skipped.items()))
    return 0
