"""CPU reference kernel of {{ cookiecutter._op.qualname }}.

This file is yours: opgen created it once and never overwrites it. {{ cookiecutter._opgen.package }}/ops.py registers it for
the CPU dispatch key; the graph-entry tests compare compiled and eager calls with it.
"""
{% if cookiecutter._op.kernels.imports %}

{% for line in cookiecutter._op.kernels.imports %}
{{ line }}
{% endfor %}
{% endif %}


{{ define(cookiecutter._op.files.cpu_kernel, cookiecutter._op.signature.parameters, cookiecutter._op.signature.returns) }}
{% if cookiecutter._op.kernels.has_reference %}
{% for line in cookiecutter._op.kernels.cpu_body %}
{% if line %}
    {{ line }}
{% else %}

{% endif %}
{% endfor %}
{% else %}
    {{ cookiecutter._op.kernels.cpu_raise }}
{% endif %}
