"""``pfc diff`` and ``pfc prove`` of whole firewalls (v2 files): each hook list on its
own, its context (interfaces, marks, connection state, address types, rates) stated as
inputs (docs/prove.md "Whole firewalls")."""
