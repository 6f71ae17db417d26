"""Closing a campaign: deliverables verified, the closing report and its manifest."""
