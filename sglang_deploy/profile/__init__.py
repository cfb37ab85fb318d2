"""Serving profiles: YAML files under profiles/ describing one SGLang server configuration.

load.py is the whole profile and its loading, sections.py its sections as typed models, yaml_lines.py the YAML
with file:line origins. Callers import the profile's entry points from here.
"""

from .load import Profile, ProfileError, line_of, load_profile

__all__ = ["Profile", "ProfileError", "line_of", "load_profile"]
