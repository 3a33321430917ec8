"""Loaders of the targets that need kernel modules: ``nfmod`` (pfc's own netfilter
module, insmod/rmmod) and ``u32`` (tc u32 + gact filters: cls_u32, act_gact and
cls_matchall are modules on Debian's kernels). Both refuse, before anything is
touched, on a kernel that cannot take them (:func:`pfc.deploy.base.check_kernel`,
``pfc.backends.nfmod.kmod``)."""
