/** What a task name may be: the registry, the desired state and the admin API all check it. */
export const TASK_NAME_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$/;
