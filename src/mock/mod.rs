//! TEMPORARY stand-in (replaced at merge).
