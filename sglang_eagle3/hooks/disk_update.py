"""`POST /update_weights_from_disk` on an EAGLE-3 server: all or nothing, and it means "new
target weights, the same drafter".

SGLang 0.5.23 hands the request's one `model_path` to every runner in turn, the target's and
then the drafter's, and a runner whose load raises reloads "the original weights" from the new
path again (model_runner_components/weight_updater.py): another model's directory killed the
scheduler, and the target's own directory reloaded the target and then failed on the drafter
(400 after a write). Here, on a server with a drafter:

- the target checkpoint is checked first (checkpoint/target_update.py: a local directory, the
  served architecture, the served tensor names and shapes, whole files); a refusal is SGLang's
  own (success=False, message) answer and nothing is written;
- only the target runner loads it; the drafter keeps its weights, and the answer says so (its
  embedding, and lm_head where it takes the target's, are the target's own tensors and follow);
- a runner whose load fails anyway (an I/O error mid-read) gets its served checkpoint back:
  its path is restored and, after an exception, reloaded from the previously served path; if
  that fails too the server cannot say what it serves, and the scheduler stops.

Drafter weights change through `update_weights_from_tensor` / `_from_distributed` (checked by
hooks/drafter_update.py); a server without a drafter keeps SGLang's own behaviour.
"""

from __future__ import annotations

from sglang.srt.plugins.hook_registry import HookType

from sglang_eagle3.checkpoint.target_update import check_target_update
from sglang_eagle3.errors import WiringError
from sglang_eagle3.log import get_logger

logger = get_logger()

MANAGER = "sglang.srt.managers.scheduler_components.weight_updater.SchedulerWeightUpdaterManager"
RUNNER = "sglang.srt.model_executor.model_runner_components.weight_updater.WeightUpdater"


def _answer(success: bool, message: str):
    from sglang.srt.managers.io_struct import UpdateWeightFromDiskReqOutput

    return UpdateWeightFromDiskReqOutput(success=success, message=message, num_paused_requests=0)


def update_target_only(original, manager, recv_req, *args, **kwargs):
    """AROUND SchedulerWeightUpdaterManager.update_weights_from_disk."""
    if manager.draft_worker is None:
        return original(manager, recv_req, *args, **kwargs)
    target = [runner for role, runner in manager._select_runners("target")]
    served = target[0].model_config.model_path
    try:
        check_target_update(served, recv_req.model_path)
    except WiringError as err:
        logger.error("%s", err)
        return _answer(False, str(err))
    draft_worker = manager.draft_worker
    manager.draft_worker = None  # SGLang's loop then selects the target runner alone
    try:
        out = original(manager, recv_req, *args, **kwargs)
    finally:
        manager.draft_worker = draft_worker
    if out.success:
        drafter = [r.model_config.model_path for _, r in draft_worker.weight_update_runners()]
        out.message = (
            f"{out.message} Target weights from {recv_req.model_path}; drafter kept "
            f"({', '.join(drafter)}: its own weights unchanged; an embedding or lm_head it "
            "shares with the target follows the target)"
        )
        logger.info("disk update: %s", out.message)
    return out


def restore_on_failure(original, updater, model_path, load_format, *args, **kwargs):
    """AROUND a runner's WeightUpdater.update_weights_from_disk: a failed load leaves the
    previously served checkpoint in place, named as served."""
    old_path = updater.model_config.model_path
    old_format = getattr(getattr(updater, "load_config", None), "load_format", None) or load_format
    try:
        ok, message = original(updater, model_path, load_format, *args, **kwargs)
    except WiringError as err:  # the drafter's check (hooks/drafter_update.py): nothing written
        updater.model_config.model_path = old_path
        logger.error("%s", err)
        return False, str(err)
    except Exception as exc:  # SGLang's rollback re-read the failing path and raised again
        logger.error("disk update from %s failed mid-load (%s); reloading %s", model_path,
                     exc, old_path)  # fmt: skip
        updater.model_config.model_path = old_path
        try:
            ok, again = original(updater, old_path, old_format, *args, **kwargs)
        except Exception as second:
            ok, again = False, str(second)
        if not ok:  # fail closed: what this server serves is unknown now
            raise SystemExit(
                f"sglang_eagle3: the update from {model_path} failed mid-load ({exc}) and the "
                f"served checkpoint {old_path} could not be reloaded ({again}); stopping"
            ) from None
        return False, (f"update refused: loading {model_path} failed ({exc}); the weights "
                       f"served before were reloaded from {old_path}")  # fmt: skip
    if not ok:
        updater.model_config.model_path = old_path  # SGLang set it before it failed
    return ok, message


HOOKS = [
    (f"{MANAGER}.update_weights_from_disk", update_target_only, HookType.AROUND),
    (f"{RUNNER}.update_weights_from_disk", restore_on_failure, HookType.AROUND),
]
