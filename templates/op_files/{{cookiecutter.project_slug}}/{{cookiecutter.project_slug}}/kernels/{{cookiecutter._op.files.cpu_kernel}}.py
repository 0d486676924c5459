{% import "python.j2" as py %}
"""CPU reference kernel of {{ cookiecutter._op.qualname }}.

This file is yours: opgen created it once and never overwrites it. {{ cookiecutter._opgen.package }}/ops.py registers it for
the CPU dispatch key; the graph-entry tests compare compiled and eager calls with it.
"""
{% if cookiecutter._op.cpu_kernel_imports %}

{% for line in cookiecutter._op.cpu_kernel_imports %}
{{ line }}
{% endfor %}
{% endif %}


{{ py.define(cookiecutter._op.cpu_kernel, cookiecutter._op.parameters, cookiecutter._op.returns) }}
{% if cookiecutter._op.has_reference %}
{% for line in cookiecutter._op.cpu_kernel_body %}
{% if line %}
    {{ line }}
{% else %}

{% endif %}
{% endfor %}
{% else %}
    {{ cookiecutter._op.cpu_kernel_raise }}
{% endif %}
