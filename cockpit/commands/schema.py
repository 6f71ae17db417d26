"""`cockpit schema`: print the JSON Schema of campaign.toml, for an editor to check the file as you type."""

from __future__ import annotations

import json


def run(args) -> int:
    from cockpit.plan.schema import json_schema

    print(json.dumps(json_schema(), indent=2, ensure_ascii=False))
    return 0
