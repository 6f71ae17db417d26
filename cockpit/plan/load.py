"""Loading a campaign: `DIR/campaign.toml` (or a text such as the frozen plan) read, parsed and
validated at each load; nothing validated is kept on disk."""

from __future__ import annotations

from pathlib import Path

from cockpit.common import startup
from cockpit.common.layout import CAMPAIGN_FILE
from cockpit.plan.campaign import Campaign, CampaignError, CampaignFinding
from cockpit.plan.schema import validate_text


def read_campaign_text(text: str, directory: Path, file_label: str = CAMPAIGN_FILE) -> Campaign:
    """Parse and validate campaign TOML text; raise CampaignError naming every problem."""
    return validate_text(text, directory, file_label)


def load_campaign(directory: str | Path) -> Campaign:
    """Load `DIR/campaign.toml` (or a path to the file itself), validated with pydantic at each load."""
    path = Path(directory)
    if path.is_file() or path.suffix == ".toml":
        directory, file = path.parent, path
    else:
        directory, file = path, path / CAMPAIGN_FILE
    label = str(file)
    if not directory.exists():
        raise CampaignError([CampaignFinding(str(directory), "", "no such folder; give the folder that holds campaign.toml")])
    if not file.is_file():
        raise CampaignError([CampaignFinding(label, "", f"no campaign file here; create {CAMPAIGN_FILE} (`cockpit init DIR` writes one, docs/campaign-file.md describes it) or give the folder that holds it")])
    try:
        data = file.read_bytes()
    except OSError as error:
        raise CampaignError([CampaignFinding(label, "", f"cannot be read: {error.strerror}")]) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise CampaignError([CampaignFinding(label, "", "is not UTF-8 text; save it as UTF-8", line)]) from None
    campaign = read_campaign_text(text, directory.resolve(), label)
    startup.settled()  # the process's start ends with its campaign: collection resumes
    return campaign
