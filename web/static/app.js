// Demo page script (placeholder until the full page lands).
